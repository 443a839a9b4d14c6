"""Online serving benchmark: an asyncio load generator for OpenAI-compatible servers
(client, arrivals, prompts, metrics) and a real local server to run it on (local_server)."""
