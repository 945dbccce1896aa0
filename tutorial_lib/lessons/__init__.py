"""What the notebooks call: course runner, live monitor, plots, analyses, studies, figures, demos."""
