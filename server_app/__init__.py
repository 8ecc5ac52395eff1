"""The ServerApp (`server_app.app:app`) and its per-round results recorder."""
