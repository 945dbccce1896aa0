"""Figures: small plots, the notebooks' cost and scaling figures, and the live monitor of running jobs."""
