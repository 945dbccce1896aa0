"""The sentences a notebook closes with, chosen from its numbers: claims on speeds, verdicts on runs and models."""
