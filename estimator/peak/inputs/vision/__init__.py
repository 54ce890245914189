"""Vision models whose inputs the generic image path does not make: detectors and towers asked alone, the SAM family, text-and-image pairs, PI0."""
