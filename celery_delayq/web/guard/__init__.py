"""Who and what the dashboard answers: auth (basic or a token) and the loopback rule, the
security headers of every answer, the Host check against DNS rebinding, and the limit on failed
logins."""
