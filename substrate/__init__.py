"""mnemolog.substrate"""
