"""Fitting core of `frontier calibrate`: declared free parameters, a robust least-squares fit of
them to measured values through a caller's predictor, cross-validation grouped by
configuration, and the CALIBRATION.yaml overlay the fit produces.

It knows nothing of how a prediction is made (the caller passes a `Predictor`), so it sits
beside the measured-run reader rather than on top of it.
"""
