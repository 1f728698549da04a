"""Calibration harness: time real kernels, fit the cost model, write calibrated profiles.

Needs the optional extra (`pip install '.[calibrate]'`); torch and triton are imported only inside
the functions that use them, so importing this package never needs them.
"""

from capsim.harness.api import CalibrationResult, CheckReport, calibrate, check, refit

__all__ = ["CalibrationResult", "CheckReport", "calibrate", "check", "refit"]
