"""The ClientApp (`client_app.app:app`) and the local update it runs (`client_app.local_update`)."""
