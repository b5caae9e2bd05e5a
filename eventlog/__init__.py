"""mnemolog.eventlog"""
