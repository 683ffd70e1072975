"""The one way from a search result to a Program: lowering, pricing and assembly, once each, in order.

The driver (refcomp.compiler), measured mode, the fuzzer and the program cache's loader all build
programs here, so exec receives kernels already built and priced and never calls back into the search.
"""
