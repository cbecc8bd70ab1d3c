"""Screens pushed over the main view: one rank's detail, two ranks compared, prompts."""
