"""mnemolog.curators"""
