"""The way to LLM APIs: the client, the one owner of its connections, and recorded exchanges."""
