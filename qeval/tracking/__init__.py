"""Tracking adapters: views of the run record in an experiment tracker."""
