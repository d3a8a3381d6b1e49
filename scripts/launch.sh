# launch.sh: what the training recipes share (sourced by scripts/gpt2_124m.sh and scripts/gpt2_350m.sh):
# the launch options, the checks of the trainer's command before anything starts, and the mpirun / srun
# line. A recipe calls launch_parse with its own command line, builds the trainer's flags (it may read
# DP, TP, PP, WORLD that launch_parse sets), and hands them to launch_run.
#
# Launch options (before an optional "--"; what follows "--" is appended to the trainer's flags, and a
# flag given twice takes its last value, as the trainer's own parser does):
#   --gpus N       processes per node, one per GPU (default 1; with --slurm: $SLURM_NTASKS_PER_NODE)
#   --nodes N      nodes (default 1; the hosts of --hostfile; with --slurm: $SLURM_JOB_NUM_NODES)
#   --hostfile F   Open MPI hostfile: mpirun --hostfile F -np nodes*gpus --map-by ppr:gpus:node
#   --slurm        inside a Slurm allocation: srun --mpi=pmix --nodes N --ntasks-per-node gpus
#   --dry-run      check, print the command, run nothing
# One node and one process: the trainer itself, no launcher; one node and more: mpirun -np N.
# Environment: TRAINER (default ./train_gpt), DP TP PP (the layout; DP defaults to the processes / (TP*PP)),
# MPIRUN_ARGS / SRUN_ARGS (extra words for the launcher, split on spaces).
#
# The checks (each error is one line "error: <flag>: expected ..., found ..." and exit 1; they mirror the
# trainer's own start-up checks: llm/comm/comm_mesh.h, llm/train/args.h, llm/model/tensors.h,
# llm/parallel/pipeline.h, llm/parallel/schedule.h): every flag is one the trainer knows (read from
# `$TRAINER --help`, else from the FLAGS table of llm/train/args.h) and has a value; dp * tp * pp = the
# processes launched; the total batch a multiple of B * T * dp (the gradient-accumulation steps it
# implies are printed); T <= the model's maxT; NH, Vp (and for the CUDA kernels C / tp % 8) split over tp;
# with --sequence-parallel, T over tp; pp * vpp <= layers (the trainer allows uneven stages: a warning);
# the interleaved schedule's micro-batches a multiple of pp; --zero 0..3. Then warnings (not errors):
# data files missing (with how to make them: the HellaSwag file too), a tp group that spans nodes, the trainer not
# built.
# Then the figures: tokens per step, steps, total tokens, and the command.

LAUNCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAUNCH_ROOT=$(dirname "$LAUNCH_DIR")
# flags a trainer newer than this branch's gains (AdamW's betas and eps, the step line's period): a
# command naming them is not refused here even where the table read lacks them (a warning instead)
LAUNCH_NEWER_FLAGS=" --beta1 --beta2 --eps --print-every "

launch_die() { echo "error: $*" >&2; exit 1; }
launch_warn() { echo "warning: $*" >&2; }
launch_is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
launch_is_int() { [[ $1 =~ ^-?[0-9]+$ ]]; }

launch_usage() {
    cat << EOF
usage: $0 [--gpus N] [--nodes N] [--hostfile F | --slurm] [--dry-run] [-- trainer flags...]
  --gpus N       processes per node, one per GPU (default 1)
  --nodes N      nodes (default 1; with --hostfile: its hosts; with --slurm: \$SLURM_JOB_NUM_NODES)
  --hostfile F   several machines: mpirun --hostfile F -np nodes*gpus
  --slurm        several machines in a Slurm allocation: srun --mpi=pmix
  --dry-run      check the command and print it; run nothing
  -- FLAGS       appended to the trainer's flags (the last value of a flag wins)
environment: TRAINER DATA_DIR OUT_DIR DP TP PP ZERO MODEL B T TOTAL_BATCH STEPS TRAIN_DATA VAL_DATA TOKENIZER
             HELLASWAG RESUME MPIRUN_ARGS SRUN_ARGS (docs/recipes.md)
EOF
}

# launch_parse NAME ARGS...: the launch options into L_* and the layout defaults into WORLD, DP, TP, PP
launch_parse() {
    L_NAME=$1; shift
    L_GPUS=""; L_NODES=""; L_HOSTFILE=""; L_SLURM=0; L_DRY=0; L_EXTRA=()
    while [ $# -gt 0 ]; do
        case $1 in
            --gpus|--nodes|--hostfile)
                [ $# -ge 2 ] || launch_die "$1: expected a value, found the end of the command line"
                case $1 in --gpus) L_GPUS=$2 ;; --nodes) L_NODES=$2 ;; --hostfile) L_HOSTFILE=$2 ;; esac
                shift 2 ;;
            --slurm) L_SLURM=1; shift ;;
            --dry-run) L_DRY=1; shift ;;
            -h|--help) launch_usage; exit 0 ;;
            --) shift; L_EXTRA=("$@"); break ;;
            *) launch_die "$1: expected a launch option (--gpus N, --nodes N, --hostfile F, --slurm, --dry-run) or -- before trainer flags, found '$1'" ;;
        esac
    done
    if [ -n "$L_HOSTFILE" ] && [ $L_SLURM -eq 1 ]; then
        launch_die "--hostfile $L_HOSTFILE: expected either --hostfile or --slurm, found both"
    fi
    if [ $L_SLURM -eq 1 ]; then  # inside an allocation its sizes are the defaults
        [ -z "$L_NODES" ] && L_NODES=${SLURM_JOB_NUM_NODES:-1}
        [ -z "$L_GPUS" ] && [[ ${SLURM_NTASKS_PER_NODE:-} =~ ^([0-9]+) ]] && L_GPUS=${BASH_REMATCH[1]}
    fi
    if [ -n "$L_HOSTFILE" ]; then
        [ -f "$L_HOSTFILE" ] && [ -r "$L_HOSTFILE" ] || launch_die "--hostfile: expected a readable file, found none at '$L_HOSTFILE'"
        # its hosts: the lines that are not blank or comments; "slots=K" says how many processes one takes
        local hosts short
        hosts=$(sed -e 's/#.*//' "$L_HOSTFILE" | awk 'NF > 0' | wc -l)
        [ "$hosts" -gt 0 ] || launch_die "--hostfile $L_HOSTFILE: expected at least one host, found none"
        if [ -z "$L_NODES" ]; then L_NODES=$hosts
        elif [ "$L_NODES" != "$hosts" ]; then
            launch_die "--nodes $L_NODES: expected the hosts of --hostfile $L_HOSTFILE, found $hosts there"
        fi
        short=$(sed -e 's/#.*//' "$L_HOSTFILE" | awk -v g="${L_GPUS:-1}" '{ for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { s = substr($i, 7) + 0; if (s < g) { print $1 " has slots=" s; exit } } }')
        [ -z "$short" ] || launch_die "--hostfile $L_HOSTFILE: expected slots >= --gpus ${L_GPUS:-1} on every host, found $short"
    fi
    L_GPUS=${L_GPUS:-1}; L_NODES=${L_NODES:-1}
    launch_is_uint "$L_GPUS" && [ "$L_GPUS" -ge 1 ] || launch_die "--gpus: expected a positive integer, found '$L_GPUS'"
    launch_is_uint "$L_NODES" && [ "$L_NODES" -ge 1 ] || launch_die "--nodes: expected a positive integer, found '$L_NODES'"
    if [ "$L_NODES" -gt 1 ] && [ -z "$L_HOSTFILE" ] && [ $L_SLURM -eq 0 ]; then
        launch_die "--nodes $L_NODES: expected --hostfile F or --slurm to say where the other nodes are, found neither"
    fi
    WORLD=$((L_NODES * L_GPUS))
    TRAINER=${TRAINER:-./train_gpt}
    TP=${TP:-1}; PP=${PP:-1}
    launch_is_uint "$TP" && [ "$TP" -ge 1 ] || launch_die "--tp (TP): expected a positive integer, found '$TP'"
    launch_is_uint "$PP" && [ "$PP" -ge 1 ] || launch_die "--pp (PP): expected a positive integer, found '$PP'"
    # dp: the processes over tp*pp; where tp*pp does not divide them, 0 (the trainer's "the rest"), refused below
    if [ -z "${DP:-}" ]; then
        if [ $((WORLD % (TP * PP))) -eq 0 ]; then DP=$((WORLD / (TP * PP))); else DP=0; fi
    fi
    launch_is_uint "$DP" || launch_die "--dp (DP): expected a non-negative integer, found '$DP'"
}

# launch_resume OUT: "latest" when OUT holds a checkpoint (state_<step>.bin or ckpt_<step>/, the names of
# llm/ckpt/ckpt_dir.h), else "0": a rerun of the same recipe goes on where the last one stopped (llm.c's -y 1)
launch_resume() {
    local f
    for f in "$1"/state_[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9].bin "$1"/ckpt_[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do
        [ -e "$f" ] && { echo latest; return; }
    done
    echo 0
}

# launch_hellaswag: llm.c's -h 1 for a recipe: L_HELLASWAG=(--hellaswag FILE) when FILE is there (HELLASWAG, default
# data/hellaswag/hellaswag_val.bin, what python dev/data/hellaswag.py writes); the default not there: a warning naming
# that command (launch_check's, after its errors), and the run goes on without HellaSwag, as llm.c's does without its file. HELLASWAG='' turns it off; a
# HELLASWAG named but not there goes to the trainer (launch_check warns, the trainer stops with one line).
launch_hellaswag() {
    local f=${HELLASWAG-data/hellaswag/hellaswag_val.bin}
    L_HELLASWAG=()
    [ -n "$f" ] || return 0
    if [ -n "${HELLASWAG:-}" ] || [ -f "$f" ]; then L_HELLASWAG=(--hellaswag "$f"); return 0; fi
    L_HELLASWAG_NOTE="--hellaswag $f: not there: the run goes on without HellaSwag (llm.c's -h 1); make it: python dev/data/hellaswag.py"
}
L_HELLASWAG_NOTE=""  # launch_check's warning, with the others

# launch_micro_batch MAX T TOTAL: the micro-batch B for DP ranks: MAX, or where B*T*dp would pass TOTAL
# tokens (more than TOTAL / (MAX*T) ranks), the largest B below it that keeps TOTAL a multiple of B*T*dp:
# the step's tokens (the hyperparameter) stay, the gradient accumulation is what changes
launch_micro_batch() {
    local b=$1 t=$2 total=$3 dp=$DP
    [ "$dp" -ge 1 ] || dp=1
    while [ "$b" -gt 1 ] && [ $((total % (b * t * dp))) -ne 0 ]; do b=$((b - 1)); done
    [ $((total % (b * t * dp))) -eq 0 ] && echo "$b" || echo "$1"
}

# the trainer's flags into LAUNCH_TABLE, "LONG SHORT" per line (SHORT 0: none), and where they were read
# into LAUNCH_FLAG_SRC: the trainer's --help, else the FLAGS table of llm/train/args.h
launch_flag_table() {
    LAUNCH_TABLE=""
    if [ -x "$TRAINER" ]; then
        LAUNCH_TABLE=$(timeout 20 "$TRAINER" --help 2>/dev/null |
            awk '$1 ~ /^--[a-z0-9-]+$/ && $1 != "--help" { print $1, ($2 ~ /^-[a-zA-Z]$/ ? substr($2, 2) : "0") }')
        LAUNCH_FLAG_SRC="$TRAINER --help"
        [ -n "$LAUNCH_TABLE" ] && return
    fi
    LAUNCH_TABLE=$(sed -nE "s/^ *\{\"(--[a-z0-9-]+)\", '?([a-zA-Z]|0)'?,.*/\1 \2/p" "$LAUNCH_ROOT/llm/train/args.h" 2>/dev/null)
    LAUNCH_FLAG_SRC="llm/train/args.h"
}

# a word as the shell reads it back: bare when safe, else in single quotes
launch_quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then printf '%s' "$1"
    else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}

# launch_files GLOB: the files here that GLOB names, into L_FILES (the trainer globs its data flags itself)
launch_files() {
    local f; L_FILES=()
    for f in $1; do [ -f "$f" ] && L_FILES+=("$f"); done
}

# 12345678 -> 12,345,678
launch_commas() { echo "$1" | sed -E ':a; s/^(-?[0-9]+)([0-9]{3})/\1,\2/; ta'; }

# launch_model SPEC: "L C NH maxT V" of a descriptor dN[,C=..][,NH=..][,maxT=..][,V=..] (GPT-2's sizes for
# d12/24/36/48, else C = 64 L and NH = L: llm/model/tensors.h), or of an llm.c checkpoint's header, or "" if
# neither can be read
launch_model() {
    local s=$1
    if [[ $s =~ ^d([0-9]+)(,.*)?$ ]]; then
        local L=$((10#${BASH_REMATCH[1]})) rest=${BASH_REMATCH[2]} C NH maxT=1024 V=50257 kv
        case $L in 12) C=768; NH=12 ;; 24) C=1024; NH=16 ;; 36) C=1280; NH=20 ;; 48) C=1600; NH=25 ;; *) C=$((64 * L)); NH=$L ;; esac
        IFS=, read -ra kv <<< "${rest#,}"
        for e in "${kv[@]}"; do
            case $e in C=*) C=${e#C=} ;; NH=*) NH=${e#NH=} ;; maxT=*) maxT=${e#maxT=} ;; V=*) V=${e#V=} ;;
                *) launch_die "--model: in '$s' expected one of the keys C, NH, maxT, V, found '$e'" ;; esac
        done
        for e in "$C" "$NH" "$maxT" "$V"; do
            launch_is_uint "$e" && [ "$e" -ge 1 ] || launch_die "--model: in '$s' expected positive integers, found '$e'"
        done
        echo "$L $C $NH $maxT $V"
    elif [ -f "$s" ]; then  # llm.c checkpoint: int32 header, [0] magic 20240326, [2..6] = maxT V L NH C
        od -An -t d4 -N 28 "$s" | xargs | awk '$1 == 20240326 && $5 > 0 && $6 > 0 && $7 > 0 { print $5, $7, $6, $3, $4 }'
    fi
}

# launch_check FLAGS...: the trainer's flags (no program name) checked, the figures printed; sets L_STEPS
launch_check() {
    launch_flag_table
    [ -n "$LAUNCH_TABLE" ] || launch_die "flags: expected the trainer's flag table (from $TRAINER --help or llm/train/args.h), found none"
    declare -A known=() shortof=() V=()
    local long short f
    while read -r long short; do known[$long]=1; [ "$short" != 0 ] && shortof[-$short]=$long; done <<< "$LAUNCH_TABLE"
    while [ $# -gt 0 ]; do
        f=$1
        if [ -n "${known[$f]:-}" ]; then long=$f
        elif [ -n "${shortof[$f]:-}" ]; then long=${shortof[$f]}
        elif [[ $LAUNCH_NEWER_FLAGS == *" $f "* ]]; then
            long=$f; L_NEWER+=("$f")
        else
            launch_die "$f: expected a flag of the trainer (the flags of $LAUNCH_FLAG_SRC), found an unknown flag"
        fi
        [ $# -ge 2 ] || launch_die "$f: expected a value, found the end of the command"
        V[$long]=$2; shift 2
    done
    # the values the checks need, with the trainer's defaults (llm/train/args.h, parse_args)
    local B=${V[--batch]:-4} T=${V[--seq-len]:-1024} total=${V[--total-batch]:--1} dp=${V[--dp]:-0}
    local tp=${V[--tp]:-1} pp=${V[--pp]:-1} vpp=${V[--vpp]:-1} zero=${V[--zero]:-0} steps=${V[--steps]:--1}
    local sp=${V[--sequence-parallel]:-0} sched=${V[--schedule]:-1f1b} model=${V[--model]:-d12}
    local k
    for k in --batch:"$B":1 --seq-len:"$T":1 --dp:"$dp":0 --tp:"$tp":1 --pp:"$pp":1 --vpp:"$vpp":1; do
        local n=${k%%:*} v=${k#*:}; local lo=${v##*:}; v=${v%:*}
        launch_is_uint "$v" && [ "$v" -ge "$lo" ] || launch_die "$n: expected an integer >= $lo, found '$v'"
    done
    launch_is_int "$steps" && [ "$steps" -ge -1 ] || launch_die "--steps: expected an integer >= -1, found '$steps'"
    [[ $zero =~ ^[0-3]$ ]] || launch_die "--zero: expected 0, 1, 2 or 3, found '$zero'"
    # the processes: dp * tp * pp of them (llm/comm/comm_mesh.h)
    local where="--nodes $L_NODES x --gpus $L_GPUS = $WORLD"
    if [ "$dp" -eq 0 ]; then
        [ $((WORLD % (tp * pp))) -eq 0 ] || launch_die "--tp $tp x --pp $pp = $((tp * pp)): expected to divide the processes launched ($where), found a remainder of $((WORLD % (tp * pp)))"
        dp=$((WORLD / (tp * pp)))
    elif [ $((dp * tp * pp)) -ne "$WORLD" ]; then
        launch_die "--dp $dp x --tp $tp x --pp $pp = $((dp * tp * pp)) processes: expected the processes launched ($where), found $((dp * tp * pp))"
    fi
    # the batch: every dp rank reads B*T tokens per micro-step (llm/train/args.h, args_check_layout)
    local btdp=$((B * T * dp))
    [ "$total" = -1 ] && total=$btdp
    launch_is_uint "$total" && [ "$total" -ge 1 ] || launch_die "--total-batch: expected a positive integer, found '$total'"
    [ $((total % btdp)) -eq 0 ] || launch_die "--total-batch $total: expected a multiple of B*T*dp = $B*$T*$dp = $btdp, found a remainder of $((total % btdp))"
    local accum=$((total / btdp))
    # the model: T, and what tp and pp split (llm/model/tensors.h tp_layout_error, llm/parallel/pipeline.h)
    local cfg L C NH maxT Vs Vp
    cfg=$(launch_model "$model") || exit 1
    if [ -n "$cfg" ]; then
        read -r L C NH maxT Vs <<< "$cfg"
        Vp=$(( (Vs + 127) / 128 * 128 ))
        [ $((C % NH)) -eq 0 ] || launch_die "--model $model: expected C divisible by NH, found C=$C NH=$NH"
        [ "$T" -le "$maxT" ] || launch_die "--seq-len $T: expected T <= the model's maxT = $maxT, found $T"
        [ $((NH % tp)) -eq 0 ] || launch_die "--tp $tp: expected to divide the heads NH = $NH of --model $model, found a remainder of $((NH % tp))"
        [ $((Vp % tp)) -eq 0 ] || launch_die "--tp $tp: expected to divide the padded vocabulary Vp = $Vp, found a remainder of $((Vp % tp))"
        if [[ $(basename "$TRAINER") != *_cpu* ]] && [ $(((C / tp) % 8)) -ne 0 ]; then
            launch_die "--tp $tp: expected C / tp = $C / $tp to be a multiple of 8 (the CUDA kernels' 16-byte rows), found $((C / tp))"
        fi
        [ $((pp * vpp)) -le "$L" ] || launch_die "--pp $pp x --vpp $vpp = $((pp * vpp)) stages: expected at most one stage per layer, found $L layers"
    fi
    if [ "$sp" = 1 ] && [ "$tp" -gt 1 ] && [ $((T % tp)) -ne 0 ]; then
        launch_die "--sequence-parallel 1: expected the sequence length $T to divide evenly over --tp $tp, found a remainder of $((T % tp))"
    fi
    if [ "$vpp" -gt 1 ] && [ "$pp" -lt 2 ]; then launch_die "--vpp $vpp: expected --pp >= 2 (interleaving needs a pipeline), found --pp $pp"; fi
    if [ "$vpp" -gt 1 ] && [ "$sched" != interleaved ]; then launch_die "--vpp $vpp: expected --schedule interleaved, found --schedule $sched"; fi
    if [ "$sched" = interleaved ] && [ $((accum % pp)) -ne 0 ]; then
        launch_die "--schedule interleaved: expected the micro-batches per step ($accum) to be a multiple of --pp $pp, found a remainder of $((accum % pp))"
    fi
    # warnings: nothing above failed
    [ -z "$cfg" ] && launch_warn "--model $model: not a descriptor and not an llm.c checkpoint here: its T, tp and pp checks skipped"
    [ -n "$cfg" ] && [ $((L % (pp * vpp))) -ne 0 ] && launch_warn "--pp $pp x --vpp $vpp: $L layers do not split evenly over $((pp * vpp)) stages (the trainer allows it; the largest stage sets the pace)"
    [ "$L_NODES" -gt 1 ] && [ $((L_GPUS % tp)) -ne 0 ] && launch_warn "--tp $tp: does not divide --gpus $L_GPUS: a tp group spans two nodes (its all-reduces cross the network)"
    for f in "${L_NEWER[@]}"; do
        launch_warn "$f: not a flag of the trainer read ($LAUNCH_FLAG_SRC), only of newer ones: this binary would stop at it"
    done
    local train=${V[--train-data]:-} val=${V[--val-data]:-} tok=${V[--tokenizer]:-} shards=() s
    if [ -n "$train" ]; then
        launch_files "$train"; shards=("${L_FILES[@]}")
        [ ${#shards[@]} -gt 0 ] || launch_warn "--train-data '$train': no file matches here; make the data: ${L_DATA_HINT:-see docs/recipes.md}"
    fi
    if [ -n "$val" ]; then
        launch_files "$val"
        [ ${#L_FILES[@]} -gt 0 ] || launch_warn "--val-data '$val': no file matches here; make the data: ${L_DATA_HINT:-see docs/recipes.md}"
    fi
    [ -n "$L_HELLASWAG_NOTE" ] && launch_warn "$L_HELLASWAG_NOTE"
    local hs=${V[--hellaswag]:-}
    [ -n "$hs" ] && [ ! -f "$hs" ] && launch_warn "--hellaswag $hs: no such file here (the trainer stops at it); make it: python dev/data/hellaswag.py"
    [ -n "$tok" ] && [ ! -f "$tok" ] && launch_warn "--tokenizer $tok: no such file here (samples would print token ids); make the data: ${L_DATA_HINT:-see docs/recipes.md}"
    # the steps: --steps, or one epoch of the train shards (the trainer's count: (tokens - 1) / T samples a
    # shard, total / T samples a step; llm/train/dataloader.h and train_gpt.cu)
    local samples=0 ntok=0 n
    for s in "${shards[@]}"; do
        n=$(od -An -t d4 -j 8 -N 4 "$s" 2>/dev/null | tr -d ' ')
        launch_is_uint "${n:-x}" || continue
        ntok=$((ntok + n)); [ "$n" -gt 0 ] && samples=$((samples + (n - 1) / T))
    done
    echo "$L_NAME: --model $model${cfg:+ (L $L, C $C, NH $NH)} | processes: $WORLD = $L_NODES node(s) x $L_GPUS per node = dp $dp x tp $tp x pp $pp | ZeRO-$zero"
    echo "batch: $(launch_commas "$total") tokens per step = B $B x T $T x dp $dp x $accum gradient-accumulation step(s)"
    if [ "$steps" -ge 0 ]; then
        L_STEPS=$steps
        echo "steps: $(launch_commas "$steps") | $(launch_commas $((steps * total))) tokens in all"
    elif [ "$samples" -gt 0 ]; then
        L_STEPS=$((samples / (total / T))); [ "$L_STEPS" -le 0 ] && L_STEPS=1
        echo "steps: one epoch of the train data: $(launch_commas "$L_STEPS") ($(launch_commas "$ntok") tokens in ${#shards[@]} shards) | $(launch_commas $((L_STEPS * total))) tokens in all"
    else
        L_STEPS=-1
        echo "steps: one epoch of the train data (no shard here to count)"
    fi
}

# launch_run FLAGS...: the trainer's command (FLAGS, then the flags after "--"), checked, printed, and
# run under the launcher (exec) unless --dry-run
launch_run() {
    L_NEWER=()
    local cmd=("$TRAINER" "$@" "${L_EXTRA[@]}") pre=() extra=()
    launch_check "${cmd[@]:1}"
    if [ "$L_SLURM" -eq 1 ]; then
        read -ra extra <<< "${SRUN_ARGS:-}"
        pre=(srun --mpi=pmix --nodes "$L_NODES" --ntasks-per-node "$L_GPUS" "${extra[@]}")
    elif [ -n "$L_HOSTFILE" ]; then
        read -ra extra <<< "${MPIRUN_ARGS:-}"
        pre=(mpirun --hostfile "$L_HOSTFILE" -np "$WORLD" --map-by "ppr:$L_GPUS:node" "${extra[@]}")
    elif [ "$WORLD" -gt 1 ]; then
        read -ra extra <<< "${MPIRUN_ARGS:-}"
        pre=(mpirun -np "$WORLD" "${extra[@]}")
    fi
    local line="" w
    for w in "${pre[@]}" "${cmd[@]}"; do line+="${line:+ }$(launch_quote "$w")"; done
    echo "command: $line"
    if [ ! -x "$TRAINER" ]; then
        [ "$L_DRY" -eq 1 ] || launch_die "$TRAINER: expected the trainer built (make $(basename "$TRAINER")), found none"
        launch_warn "$TRAINER: not built here (make $(basename "$TRAINER"))"
    fi
    [ "$L_DRY" -eq 1 ] && exit 0
    exec "${pre[@]}" "${cmd[@]}"
}
