"""Audio inputs: feature extractors (features), speech encoders, audio prompts, codecs and text-to-speech, streaming speech, Pop2Piano, a text-and-audio pair's audio half."""
