# Source positions for errors in handlers (docs/RATIONALE.md, "Stack positions"): QuickJS-NG
# records where code is only at calls, operators, `new`, `throw` and expression statements,
# so an error in a `return`, a declaration or an `if`/`while` condition (a property of
# undefined, a destructuring of null) was reported at the previous recorded point, a line or
# two earlier. mk/jsengine.mk runs this on a copy of quickjs.c: each line below adds one
# emit_source_loc(s) call where such a statement's expression starts, and the build checks
# that all four were added.
/^    case TOK_RETURN:$/,/^    case TOK_THROW:$/s/^\( *\)if (js_parse_expr(s))$/\1emit_source_loc(s);\n\1if (js_parse_expr(s))/
/^    case TOK_VAR:$/,/js_parse_expect_semi/s/^\( *\)if (js_parse_var(s, PF_IN_ACCEPTED, tok, \/\*export_flag\*\/false))$/\1emit_source_loc(s);\n&/
/^    case TOK_IF:$/,/js_parse_expr_paren/s/^\( *\)if (js_parse_expr_paren(s))$/\1emit_source_loc(s);\n&/
/^    case TOK_WHILE:$/,/js_parse_expr_paren/s/^\( *\)if (js_parse_expr_paren(s))$/\1emit_source_loc(s);\n&/
