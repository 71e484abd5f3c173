"""The OpenAI dialect: ``/v1/videos`` (the OpenAI Videos API and vLLM-Omni's form of it) read into
the same submissions and rendered from the same jobs as the native API."""
