"""GameOn-RL: language-goal robot stacking, curricula and a VLM experimenter."""

__version__ = "0.1.0"
