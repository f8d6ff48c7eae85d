"""netprof.backends"""
