"""HTTP routes, one module per concern; each reads `request.app.state.backends`."""
