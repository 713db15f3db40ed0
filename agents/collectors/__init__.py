"""Collectors: one module per source, each with a real and a simulated backend behind one interface."""
