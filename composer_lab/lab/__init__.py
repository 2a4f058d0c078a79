"""The lab: widgets to switch algorithms and reorder passes live, and plots of runs."""
