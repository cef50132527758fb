# Sourced by colocate.sh and server.sh: the launcher's own `--key value` defaults, each kept only when the user's
# arguments do not give that key (in any spelling: --a.b_c, --a.b-c, --a.b_c=v), since `grae train` refuses a key
# given twice. Usage: USER_ARGS=("$@"); default --trl.use_vllm true; …; grae train RECIPE "${DEFAULTS[@]}" "$@"
DEFAULTS=()

_key() { local k=${1%%=*}; k=${k#--}; echo "${k//-/_}"; }

given() {
    local key arg
    key=$(_key "$1")
    for arg in "${USER_ARGS[@]+"${USER_ARGS[@]}"}"; do
        [[ $arg == --* && $(_key "$arg") == "$key" ]] && return 0
    done
    return 1
}

# default --key value: add the pair unless the user gives --key; default --flag: a switch without a value
default() {
    given "$1" && return 0
    DEFAULTS+=("$@")
}
