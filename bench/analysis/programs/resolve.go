package programs

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"path"
	"strconv"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// resolution is what a program expression can be: names, or a parameter of
// the enclosing function (param >= 0), or unresolved (a reason).
type resolution struct {
	names      []string
	param      int
	unresolved string
}

func (r resolution) ok() bool { return r.unresolved == "" && r.param < 0 }

func names(n ...string) resolution { return resolution{names: n, param: -1} }
func unresolved(format string, args ...any) resolution {
	return resolution{param: -1, unresolved: fmt.Sprintf(format, args...)}
}

const (
	maxDepth = 12
	maxNames = 64
)

// cross combines every name of a with every name of b. A name built from a
// parameter does not make the function a wrapper: the parameter is not the
// program.
func cross(a, b resolution, join func(x, y string) string) resolution {
	if a.param >= 0 || b.param >= 0 {
		return unresolved("a name built from a parameter")
	}
	if !a.ok() {
		return a
	}
	if !b.ok() {
		return b
	}
	var out []string
	for _, x := range a.names {
		for _, y := range b.names {
			out = append(out, join(x, y))
		}
	}
	if len(out) > maxNames {
		return unresolved("more than %d possible names", maxNames)
	}
	return names(dedupe(out)...)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// base is the program name of a path.
func base(r resolution) resolution {
	if !r.ok() {
		return r
	}
	// "" is what functions return beside an error: no program.
	var out []string
	for _, n := range r.names {
		if n != "" {
			out = append(out, path.Base(n))
		}
	}
	return names(dedupe(out)...)
}

func (s *scanner) resolve(ctx fnCtx, e ast.Expr, depth int) resolution {
	if depth > maxDepth {
		return unresolved("definitions nest too deep")
	}
	info := ctx.pkg.TypesInfo
	if tv, ok := info.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
		return names(constant.StringVal(tv.Value))
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return s.resolve(ctx, e.X, depth+1)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return unresolved("a %s expression", e.Op)
		}
		return cross(s.resolve(ctx, e.X, depth+1), s.resolve(ctx, e.Y, depth+1), func(x, y string) string { return x + y })
	case *ast.Ident:
		v, ok := info.Uses[e].(*types.Var)
		if !ok {
			return unresolved("%s is not a variable", e.Name)
		}
		if vals, ok := s.bound[v]; ok {
			return names(vals...)
		}
		if i := paramIndex(info, ctx.decl, v); i >= 0 {
			if ctx.args != nil { // evaluating a callee: the caller's argument
				return ctx.args(i, depth+1)
			}
			return resolution{param: i}
		}
		if recvVar(info, ctx.decl) == v {
			return s.enum(v.Type(), "the receiver "+v.Name())
		}
		return s.resolveVar(ctx, v, depth)
	case *ast.SelectorExpr:
		if v, ok := info.Uses[e.Sel].(*types.Var); ok && v.IsField() {
			return s.resolveField(v, depth)
		}
	case *ast.IndexExpr:
		// cmd[0] where cmd ranges over a list of argument lists.
		tv := info.Types[e.Index]
		id, ok := e.X.(*ast.Ident)
		if !ok || tv.Value == nil || tv.Value.Kind() != constant.Int {
			break
		}
		i, _ := constant.Int64Val(tv.Value)
		v, ok := info.Uses[id].(*types.Var)
		if !ok {
			break
		}
		return s.resolveVarWith(ctx, v, depth, func(el ast.Expr, d int) resolution {
			lit, ok := el.(*ast.CompositeLit)
			if !ok || int(i) >= len(lit.Elts) {
				return unresolved("%s[%d] of a %s", id.Name, i, types.ExprString(el))
			}
			return s.resolve(ctx, lit.Elts[i], d)
		})
	case *ast.CallExpr:
		if tv, ok := info.Types[e.Fun]; ok && tv.IsType() && len(e.Args) == 1 { // string(x)
			r := s.resolve(ctx, e.Args[0], depth+1)
			if !r.ok() {
				return s.enum(info.TypeOf(e.Args[0]), types.ExprString(e.Args[0]))
			}
			return r
		}
		return s.resolveCall(ctx, e, depth)
	}
	if r := s.enum(info.TypeOf(e), types.ExprString(e)); r.ok() {
		return r
	}
	return unresolved("a %T expression", e)
}

// enum returns every value of a named string type the scanner was told
// about (Producers keyed by the type's name), or unresolved.
func (s *scanner) enum(t types.Type, what string) resolution {
	if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil {
		if vals, ok := s.producers[n.Obj().Pkg().Path()+"."+n.Obj().Name()]; ok {
			return names(vals...)
		}
	}
	return unresolved("%s can be any %s", what, t)
}

// basePreserving are standard functions whose result names the same program
// as their (last) argument: filepath.Join(dir, "etcd") runs etcd.
var basePreserving = map[string]bool{
	"path/filepath.Join": true, "path.Join": true, "path/filepath.Base": true,
	"path/filepath.Abs": true, "os/exec.LookPath": true,
}

// stringFuncs are standard functions the scan evaluates over every
// combination of their arguments' possible values.
var stringFuncs = map[string]func(args []string) string{
	"strings.Replace": func(a []string) string {
		n, err := strconv.Atoi(a[3])
		if err != nil {
			n = -1
		}
		return strings.Replace(a[0], a[1], a[2], n)
	},
	"strings.ReplaceAll": func(a []string) string { return strings.ReplaceAll(a[0], a[1], a[2]) },
	"strings.TrimSuffix": func(a []string) string { return strings.TrimSuffix(a[0], a[1]) },
}

func (s *scanner) resolveCall(ctx fnCtx, call *ast.CallExpr, depth int) resolution {
	info := ctx.pkg.TypesInfo
	callee, _ := typeutil.Callee(info, call).(*types.Func)
	if callee == nil {
		return unresolved("a call of a function value")
	}
	name := callee.FullName()
	if n, ok := s.producers[name]; ok {
		return names(n...)
	}
	if basePreserving[name] {
		if len(call.Args) == 0 || call.Ellipsis.IsValid() {
			return unresolved("%s of a slice", name)
		}
		// With the argument a parameter, the function is a wrapper.
		return base(s.resolve(ctx, call.Args[len(call.Args)-1], depth+1))
	}
	if f, ok := stringFuncs[name]; ok {
		if call.Ellipsis.IsValid() {
			return unresolved("%s of a slice", name)
		}
		combos := names("")
		var parts []resolution
		for _, a := range call.Args {
			var r resolution
			if tv := info.Types[a]; tv.Value != nil && tv.Value.Kind() == constant.Int {
				r = names(tv.Value.String())
			} else {
				r = s.resolve(ctx, a, depth+1)
			}
			if r.param >= 0 {
				return unresolved("a name built from a parameter")
			}
			if !r.ok() {
				return r
			}
			parts = append(parts, r)
		}
		// Every combination, as a list joined with NUL, then evaluated.
		for _, p := range parts {
			combos = cross(combos, p, func(x, y string) string { return x + "\x00" + y })
			if !combos.ok() {
				return combos
			}
		}
		var out []string
		for _, c := range combos.names {
			out = append(out, f(strings.Split(c, "\x00")[1:]))
		}
		return names(dedupe(out)...)
	}
	decl, declCtx := s.funcDecl(name)
	if decl == nil {
		return unresolved("the result of %s, which is not a known producer of program names", name)
	}
	// Evaluate the callee's returns, its parameters bound to this call's
	// arguments as the caller sees them.
	declCtx.args = func(i int, d int) resolution {
		if i >= len(call.Args) || (call.Ellipsis.IsValid() && i >= len(call.Args)-1) {
			return unresolved("a variadic argument of %s", name)
		}
		return s.resolve(ctx, call.Args[i], d)
	}
	out := names()
	found := false
	var r resolution
	ast.Inspect(decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			if len(n.Results) == 0 || !out.ok() {
				return false
			}
			if tv := declCtx.pkg.TypesInfo.Types[n.Results[0]]; tv.Type != nil && !isString(tv.Type) {
				return false
			}
			found = true
			r = s.resolve(declCtx, n.Results[0], depth+1)
			if !r.ok() {
				out = r
				return false
			}
			out.names = dedupe(append(out.names, r.names...))
		}
		return true
	})
	if out.ok() && !found {
		return unresolved("%s returns no string", name)
	}
	if !out.ok() {
		return unresolved("the result of %s: %s", name, out.unresolved)
	}
	return out
}

func isString(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsString != 0
}

// funcDecl finds a function's declaration among the loaded packages.
func (s *scanner) funcDecl(fullName string) (*ast.FuncDecl, fnCtx) {
	for _, p := range s.pkgs {
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if obj, ok := p.TypesInfo.Defs[fd.Name].(*types.Func); ok && obj.FullName() == fullName {
					return fd, fnCtx{pkg: p, decl: fd, scope: fd}
				}
			}
		}
	}
	return nil, fnCtx{}
}

// resolveVar resolves every value a local or package variable is given.
func (s *scanner) resolveVar(ctx fnCtx, v *types.Var, depth int) resolution {
	return s.resolveVarWith(ctx, v, depth, func(el ast.Expr, d int) resolution { return s.resolve(ctx, el, d) })
}

// resolveVarWith is resolveVar with elem resolving the elements of the lists
// v ranges over.
func (s *scanner) resolveVarWith(ctx fnCtx, v *types.Var, depth int, elem func(ast.Expr, int) resolution) resolution {
	var values, appended, ranges []ast.Expr
	var bad string
	visit := func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok || s.objOf(ctx, id) != v {
					continue
				}
				switch {
				case len(n.Lhs) == len(n.Rhs) && n.Tok == token.ADD_ASSIGN:
					appended = append(appended, n.Rhs[i])
				case len(n.Lhs) == len(n.Rhs):
					values = append(values, n.Rhs[i])
				case i == 0 && len(n.Rhs) == 1: // x, err := f()
					values = append(values, n.Rhs[0])
				default:
					bad = "assigned from a multi-valued expression"
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if s.objOf(ctx, id) == v && i < len(n.Values) {
					values = append(values, n.Values[i])
				}
			}
		case *ast.RangeStmt:
			if id, ok := n.Value.(*ast.Ident); ok && s.objOf(ctx, id) == v {
				ranges = append(ranges, n.X)
			}
			if id, ok := n.Key.(*ast.Ident); ok && s.objOf(ctx, id) == v {
				bad = "a range key"
			}
		}
		return true
	}
	if v.Parent() == v.Pkg().Scope() { // package level: its declaration
		for _, f := range ctx.pkg.Syntax {
			ast.Inspect(f, visit)
		}
	} else {
		ast.Inspect(ctx.scope, visit)
	}
	if bad != "" {
		return unresolved("%s is %s", v.Name(), bad)
	}
	if len(values)+len(ranges) == 0 {
		return unresolved("%s is never given a value the scan can see", v.Name())
	}
	// Values that mention v itself (x = strings.Replace(x, ...)) are
	// evaluated last, with v standing for the values found before them.
	out := names()
	var selfRef []ast.Expr
	for _, e := range values {
		if s.mentions(ctx, e, v) {
			selfRef = append(selfRef, e)
			continue
		}
		r := s.resolve(ctx, e, depth+1)
		if !r.ok() {
			return s.fromParam(v, r)
		}
		out.names = append(out.names, r.names...)
	}
	for _, x := range ranges {
		els, why := s.elems(ctx, x, depth+1)
		if why != "" {
			return unresolved("%s %s", v.Name(), why)
		}
		for _, el := range els {
			r := elem(el, depth+1)
			if !r.ok() {
				return s.fromParam(v, r)
			}
			out.names = append(out.names, r.names...)
		}
	}
	out.names = dedupe(out.names)
	if s.bound == nil {
		s.bound = map[*types.Var][]string{}
	}
	s.bound[v] = out.names
	defer delete(s.bound, v)
	var more []string
	for _, e := range selfRef {
		r := s.resolve(ctx, e, depth+1)
		if !r.ok() {
			return s.fromParam(v, r)
		}
		more = append(more, r.names...)
	}
	for _, e := range appended { // x += suffix
		r := cross(out, s.resolve(ctx, e, depth+1), func(x, y string) string { return x + y })
		if !r.ok() {
			return s.fromParam(v, r)
		}
		more = append(more, r.names...)
	}
	out.names = dedupe(append(out.names, more...))
	return out
}

// mentions reports whether e refers to v.
func (s *scanner) mentions(ctx fnCtx, e ast.Expr, v *types.Var) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && s.objOf(ctx, id) == v {
			found = true
		}
		return !found
	})
	return found
}

// fromParam turns "a parameter" into unresolved: a variable that takes a
// parameter's value on some paths only does not make a wrapper.
func (s *scanner) fromParam(v *types.Var, r resolution) resolution {
	if r.param >= 0 {
		return unresolved("%s comes from a parameter only on some paths", v.Name())
	}
	return r
}

// elems returns the element expressions of a slice or array literal,
// directly or through a variable holding one (with what append adds to it),
// or a function returning one; why says what it could not follow.
func (s *scanner) elems(ctx fnCtx, x ast.Expr, depth int) (els []ast.Expr, why string) {
	if depth > maxDepth {
		return nil, "nests too deep"
	}
	switch x := x.(type) {
	case *ast.CompositeLit:
		for _, el := range x.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value
			}
			els = append(els, el)
		}
		return els, ""
	case *ast.Ident:
		v, ok := ctx.pkg.TypesInfo.Uses[x].(*types.Var)
		if !ok {
			return nil, "ranges over " + x.Name
		}
		var values []ast.Expr
		scope := ctx.scope
		if v.Parent() == v.Pkg().Scope() {
			scope = nil
		}
		s.assignments(ctx, scope, v, func(rhs ast.Expr) { values = append(values, rhs) })
		if len(values) == 0 {
			return nil, "ranges over " + x.Name + ", whose value the scan cannot see"
		}
		for _, val := range values {
			// x = append(x, a, b) adds a and b.
			if call, ok := val.(*ast.CallExpr); ok && isBuiltin(ctx.pkg.TypesInfo, call.Fun, "append") {
				for i, a := range call.Args[1:] {
					if call.Ellipsis.IsValid() && i == len(call.Args)-2 {
						more, why := s.elems(ctx, a, depth+1)
						if why != "" {
							return nil, why
						}
						els = append(els, more...)
						continue
					}
					els = append(els, a)
				}
				continue
			}
			more, why := s.elems(ctx, val, depth+1)
			if why != "" {
				return nil, why
			}
			els = append(els, more...)
		}
		return els, ""
	case *ast.CallExpr:
		// A function whose body returns a list literal (kubeProxyTools()).
		callee, _ := typeutil.Callee(ctx.pkg.TypesInfo, x).(*types.Func)
		if callee == nil {
			break
		}
		decl, declCtx := s.funcDecl(callee.FullName())
		if decl == nil || len(decl.Body.List) != 1 {
			break
		}
		if ret, ok := decl.Body.List[0].(*ast.ReturnStmt); ok && len(ret.Results) == 1 {
			return s.elems(declCtx, ret.Results[0], depth+1)
		}
	}
	return nil, fmt.Sprintf("ranges over a %T expression", x)
}

// assignments calls f with every value assigned to v (declarations and
// single-valued assignments) within scope, or the whole package when nil.
func (s *scanner) assignments(ctx fnCtx, scope ast.Node, v *types.Var, f func(rhs ast.Expr)) {
	visit := func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if s.objOf(ctx, id) == v && i < len(n.Values) {
					f(n.Values[i])
				}
			}
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && s.objOf(ctx, id) == v && len(n.Lhs) == len(n.Rhs) {
					f(n.Rhs[i])
				}
			}
		}
		return true
	}
	if scope != nil {
		ast.Inspect(scope, visit)
		return
	}
	for _, file := range ctx.pkg.Syntax {
		ast.Inspect(file, visit)
	}
}

func isBuiltin(info *types.Info, fun ast.Expr, name string) bool {
	id, ok := fun.(*ast.Ident)
	if !ok {
		return false
	}
	b, ok := info.Uses[id].(*types.Builtin)
	return ok && b.Name() == name
}

// resolveField resolves every value a struct field is given anywhere in
// the loaded packages: keyed composite literals and assignments. Fields are
// matched by declaration position, as test variants of a package give the
// same field distinct objects.
func (s *scanner) resolveField(field *types.Var, depth int) resolution {
	out := names()
	found := false
	for _, p := range s.pkgs {
		info := p.TypesInfo
		same := func(obj types.Object) bool {
			return obj != nil && obj.Pos() == field.Pos() && obj.Name() == field.Name()
		}
		for _, file := range p.Syntax {
			for _, d := range file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				ctx := fnCtx{pkg: p, decl: fd, scope: fd}
				ast.Inspect(fd, func(n ast.Node) bool {
					var val ast.Expr
					switch n := n.(type) {
					case *ast.KeyValueExpr:
						if id, ok := n.Key.(*ast.Ident); ok && same(info.Uses[id]) {
							val = n.Value
						}
					case *ast.CompositeLit: // unkeyed: T{"IPv4", "iptables-save"}
						t := info.TypeOf(n)
						if t == nil || len(n.Elts) == 0 {
							break
						}
						st, ok := t.Underlying().(*types.Struct)
						if !ok || len(n.Elts) != st.NumFields() {
							break
						}
						if _, keyed := n.Elts[0].(*ast.KeyValueExpr); keyed {
							break
						}
						for k := 0; k < st.NumFields(); k++ {
							if same(st.Field(k)) {
								val = n.Elts[k]
							}
						}
					case *ast.AssignStmt:
						for i, l := range n.Lhs {
							if sel, ok := l.(*ast.SelectorExpr); ok && same(info.Uses[sel.Sel]) && len(n.Lhs) == len(n.Rhs) {
								val = n.Rhs[i]
							}
						}
					}
					if val == nil || !out.ok() {
						return out.ok()
					}
					found = true
					r := s.resolve(ctx, val, depth+1)
					if r.param >= 0 {
						r = unresolved("field %s is set from a parameter of %s", field.Name(), fd.Name.Name)
					}
					if !r.ok() {
						out = r
						return false
					}
					out.names = dedupe(append(out.names, r.names...))
					return true
				})
			}
		}
	}
	if !found {
		return unresolved("field %s is never set where the scan can see", field.Name())
	}
	return out
}

func (s *scanner) objOf(ctx fnCtx, id *ast.Ident) types.Object {
	if o := ctx.pkg.TypesInfo.Defs[id]; o != nil {
		return o
	}
	return ctx.pkg.TypesInfo.Uses[id]
}

// paramIndex is v's index among decl's parameters, or -1.
func paramIndex(info *types.Info, decl *ast.FuncDecl, v *types.Var) int {
	if decl == nil {
		return -1
	}
	i := 0
	for _, field := range decl.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if info.Defs[n] == v {
				return i
			}
			i++
		}
	}
	return -1
}

// recvVar is decl's receiver variable, or nil.
func recvVar(info *types.Info, decl *ast.FuncDecl) *types.Var {
	if decl == nil || decl.Recv == nil || len(decl.Recv.List) == 0 || len(decl.Recv.List[0].Names) == 0 {
		return nil
	}
	v, _ := info.Defs[decl.Recv.List[0].Names[0]].(*types.Var)
	return v
}
