"""What the user and other tools change in a chat's memory: corrections, imports,
branches, memory carried between chats."""
