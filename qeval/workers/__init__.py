"""Scripts run inside the engine/quantizer venvs: standalone, stdlib + that venv's packages only."""
