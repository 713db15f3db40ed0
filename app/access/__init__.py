"""Who may do what: agent tokens (agent_tokens), user tokens and the access modes (users), browser
sessions (sessions), and what every HTTP answer and state-changing request goes through (security)."""
