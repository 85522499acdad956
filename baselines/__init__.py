"""CleanRL-style baselines: PPO, SAC (online), BC, IQL (offline) and what they share."""
