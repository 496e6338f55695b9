"""Decoding media: frame and audio sampling with PyAV, images as one-frame videos."""
