"""The experimenter: curricula, the VLM experimenter, the skill library, embodiment and loop."""
