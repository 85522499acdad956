"""benchmark (see DESIGN.md)."""
