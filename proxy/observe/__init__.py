"""What the running proxy tells about itself: events, metrics, health, logs."""
