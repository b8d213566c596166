"""What is read of a chat's memory: the chat path's view, recall of older scenes, the
API's readout."""
