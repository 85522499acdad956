"""experimenter (see DESIGN.md)."""
