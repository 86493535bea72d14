# bash completion for qdpctl. Commands, each command's options (encode's --raw among them) and the
# encodings are read from qdpctl's own --help, so they never fall behind it; values are offered for
# --encoding, --dtype, --input-dtype and --policy, file names for the options that take files
# (--input and kernel's --input-b: .npy, CSV or raw).
_qdpctl() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} exe=${COMP_WORDS[0]}
  local cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --target | --socket | --token | --client-name | --timeout | --tls-ca | --tls-cert | \
        --tls-key | --tls-server-name) ((i++)) ;;
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $prev in
    --encoding)
      local encodings
      encodings=$("$exe" encode --help 2>/dev/null | sed -n '/^Encodings /,/^$/{s/^  \([a-z][a-z0-9-]*\) .*/\1/p}')
      COMPREPLY=($(compgen -W "$encodings" -- "$cur")); return ;;
    --dtype) COMPREPLY=($(compgen -W "complex64 complex128" -- "$cur")); return ;;
    --input-dtype) COMPREPLY=($(compgen -W "float32 float64 int64" -- "$cur")); return ;;
    --policy) COMPREPLY=($(compgen -W "auto single even uneven capacity batch" -- "$cur")); return ;;
    --input | --input-b | -o | --output | --server-file)
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --socket | --tls-ca | --tls-cert | --tls-key) COMPREPLY=($(compgen -f -- "$cur")); return ;;
  esac
  if [[ -z $cmd && $cur != -* ]]; then
    local cmds
    cmds=$("$exe" --help 2>/dev/null | sed -n '/^Commands:/,/^$/{s/^  \([a-z][a-z-]*\).*/\1/p}')
    COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    local opts
    opts=$("$exe" ${cmd:+"$cmd"} --help 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  fi
}
complete -o default -F _qdpctl qdpctl
