"""Turn program counters into map, relative pc and function names, after release."""
