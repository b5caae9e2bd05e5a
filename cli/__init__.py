"""mnemolog.cli"""
