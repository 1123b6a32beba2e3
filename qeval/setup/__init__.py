"""Install qeval's tool environments and assets on a team's own machines: `qeval setup`, `qeval kit`."""
