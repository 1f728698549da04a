"""What the user specifies, validated: config objects (frozen pydantic models), the catalogues of
GPUs, models, number formats and serving-engine profiles (data/ ships inside the package), the
model architecture arithmetic (parameter and KV counts), and the bounded YAML reader.

May import: capsim.core, capsim.errors."""
