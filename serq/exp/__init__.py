"""Experiments: sweeps, plots and calibration (issue 13)."""
