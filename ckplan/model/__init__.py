"""What describes a model: its architecture (the tensors it holds), the states a save keeps of them (bytes per
state), and how a Hugging Face config.json gives an architecture. Pure, below the frameworks and sizing."""
