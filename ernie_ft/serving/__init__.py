"""The HTTP server: limits, dynamic batching, the app and its page."""
