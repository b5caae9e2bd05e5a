"""mnemolog.projections"""
