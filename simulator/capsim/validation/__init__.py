"""The published-measurement suite: how each point becomes a simulation, the runner that compares
prediction with measurement per split (calibration, test), and the whole-forward-pass check of
calibration data.

May import: capsim.api and everything below it."""
