"""The spool's in-memory index of waiting batches (agents/spool/store.py)."""

from __future__ import annotations

from array import array
from bisect import bisect_left


class Index:
    """Spooled batches in seq order as three int arrays (24 bytes a batch), so a spool of a million small
    batches costs megabytes of memory, and finding the oldest is O(1). Removals happen at the head (acks and
    the bound take the oldest), so the head just advances and the arrays are compacted now and then."""

    def __init__(self) -> None:
        self.seq = array("q")
        self.samples = array("q")
        self.size = array("q")
        self.head = 0

    def __len__(self) -> int:
        return len(self.seq) - self.head

    def _pos(self, seq: int) -> int | None:
        i = bisect_left(self.seq, seq, self.head)
        return i if i < len(self.seq) and self.seq[i] == seq else None

    def add(self, seq: int, samples: int, size: int) -> None:
        if len(self) and seq <= self.seq[-1]:
            i = bisect_left(self.seq, seq, self.head)
            if i < len(self.seq) and self.seq[i] == seq:
                self.samples[i], self.size[i] = samples, size
                return
            for arr, v in ((self.seq, seq), (self.samples, samples), (self.size, size)):
                arr.insert(i, v)
            return
        self.seq.append(seq)
        self.samples.append(samples)
        self.size.append(size)

    def get(self, seq: int) -> tuple[int, int] | None:
        i = self._pos(seq)
        return None if i is None else (self.samples[i], self.size[i])

    def pop(self, seq: int) -> tuple[int, int] | None:
        i = self._pos(seq)
        if i is None:
            return None
        found = (self.samples[i], self.size[i])
        if i == self.head:
            self.head += 1
            if self.head > 4096 and self.head * 2 > len(self.seq):
                for arr in (self.seq, self.samples, self.size):
                    del arr[: self.head]
                self.head = 0
        else:
            for arr in (self.seq, self.samples, self.size):
                del arr[i]
        return found

    def first(self) -> int | None:
        return self.seq[self.head] if len(self) else None

    def last(self) -> int | None:
        return self.seq[-1] if len(self) else None
