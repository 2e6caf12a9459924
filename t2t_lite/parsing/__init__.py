"""Constituency parsing as translation (section 6.3): Penn Treebank trees and their linearized
form (treebank), EVALB's bracket scoring (evalb), and the decoding constraint that keeps every
output a tree over its source words (tree_constraint). `problems/wsj_parsing.py` uses them."""
