"""Helpers shared by the tests, the benches and the build-time tools: the Hub stand-in's repos and
process, the peak truth cases and the allocator measurements. Never imported by the package."""
