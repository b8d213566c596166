"""The watch path: ST's data folder followed (`watcher`), mirrored in the store
(`mirror`), indexed (`chats`)."""
