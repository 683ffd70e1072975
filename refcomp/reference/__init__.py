"""The NumPy reference: the oracle every compiled program is checked against, its dim binding and
validation, and the memory limits every executor shares. It sits just above ops, so frontends
(which fold constants with it) and executors both read it without reaching into each other."""
