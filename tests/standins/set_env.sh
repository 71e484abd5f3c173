# Stand-in for /usr/local/Ascend/ascend-toolkit/set_env.sh: reads an unset variable (as the real
# one does, hence "set +u" before sourcing) and exports a marker the stand-ins record.
_unused="${ASCEND_HOME_UNSET_ON_PURPOSE}"
export FAKE_ASCEND_ENV=1
