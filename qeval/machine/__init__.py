"""What the machine qeval runs on has: its CPU's kind and the dtype it computes fast (hardware.py), the env that
runs each tool (tool_envs.py), the qeval installed (provenance.py), and the Hugging Face models in its local cache
(hub.py). On the bottom floor with the leaves: qeval's settings read it at every start, and setup.py loads
provenance.py by its path at build time."""
