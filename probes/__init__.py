"""netprof.probes"""
