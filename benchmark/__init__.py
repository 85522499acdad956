"""The benchmark harness: evaluation protocol, run records, matrix, runners, report, leaderboard."""
