"""Test configuration for the unit tests and nbval: CPU, no network, synthetic data."""
import os

# Set before any test or notebook kernel starts (kernels inherit the environment).
os.environ["TUDUI_DATA"] = "synthetic"
os.environ["TUDUI_QUICK"] = "1"
