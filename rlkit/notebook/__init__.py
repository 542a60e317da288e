"""What the notebooks call: notebook-level steps, ipywidgets, matplotlib figures, the demo."""
