"""Per-modality features: extractors, the FeatureStore, batch extraction."""
