"""Stage 3, quantization schemes: bitsandbytes layouts (from a built model or from checkpoint
headers through the committed layout table) and fp8. Pure byte arithmetic over build and source."""
